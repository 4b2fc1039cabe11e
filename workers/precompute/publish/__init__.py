"""Publish: the delivery sinks (`delivery`: at-least-once, exactly-once), validity leases
(`lease_book.LeaseBook`) and their publication from the loop (`lease_publisher`). May import
every other stage; none imports it."""
