"""The read path: the service the endpoints share (where answers come from), the hot
single-device GET, how an answer is rendered, the live-update hub and event-stream slots, and
the response models the OpenAPI document is generated from."""
