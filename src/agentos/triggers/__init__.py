"""Triggers: signed webhooks (Standard Webhooks) that start runs of an agent.

records.py     the rows: TriggerRow, SecretRow, DeliveryRow
storage.py     the `TriggerStorage` protocol; sqlite_storage.py (triggers.db) and
               pg_storage.py (store.backend = "postgres") implement it
signatures.py  Standard Webhooks signing and verification, secrets derived from the key pepper
dispatcher.py  the background worker: committed delivery -> a run (exactly once)
template.py    the run's input, filled from the delivery's body
service.py     `TriggerService`: what the HTTP routes call
"""
