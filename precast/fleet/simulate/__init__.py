"""The simulator of any fleet spec: ground truth, readings, incidents (precast-simulator) and
labelled training rows from the same code the worker runs."""
