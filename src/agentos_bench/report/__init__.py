"""Bench reports: JSON and Markdown files, plots, statistics, the machine header, `agentos bench compare`."""
