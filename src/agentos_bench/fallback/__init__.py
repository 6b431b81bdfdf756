"""`agentos bench fallback`: the provider router's fault campaign (issue 27). The primary target
fails every request for a while in the middle of a closed-loop load; its turns must fall back to
the secondary without one failing."""
