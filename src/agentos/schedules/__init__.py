"""Schedules: runs of an agent started on a cron (in a time zone) or every N seconds (docs/schedules.md).

slots.py       pure: a schedule's slots, and which of them a round fires (misfire after downtime)
records.py     the rows: ScheduleRow, FireRow
storage.py     the `ScheduleStorage` protocol; sqlite_storage.py (schedules.db) and
               pg_storage.py (store.backend = "postgres", migration 0014) implement it
scheduler.py   the background loop: each slot claimed once under a unique key, then its run started
service.py     `ScheduleService`: what the HTTP routes call
"""
