"""State: what the worker remembers per device (`device_table.DeviceTable`), its changelog
record layout (`changelog`), reading it back on assignment (`restore.StateRestorer`), and what
the pipeline's parts share (`shared.PipelineState`). Imports no other stage."""
