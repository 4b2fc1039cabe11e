"""Device side: the event producer library and the fleet simulator."""
