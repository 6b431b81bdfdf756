"""Agent OS: a server that hosts LLM agents for thousands of concurrent users on one machine."""

__version__ = "0.1.0"
__all__ = ["__version__"]
