"""`agentos bench runs`: concurrent agent runs and runs waiting for a human."""
