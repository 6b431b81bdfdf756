"""The closed-loop load generator and `agentos bench sweep`."""
