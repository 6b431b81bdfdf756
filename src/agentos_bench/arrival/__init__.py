"""`agentos bench load`: open-arrival load with the seed's mix, phases and per-load thresholds."""
