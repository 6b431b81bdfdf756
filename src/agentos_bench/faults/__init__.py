"""`agentos bench faults`: a crash storm, provider faults and overload, with the issue's targets."""
