"""Materializing: the predictions topic read into the serving stores (the in-process view and
the shared Redis store), handing what it stored to the read path and the board."""
