"""The mock OpenAI-compatible provider (`agentos mock-llm`): server, answer scripts, wire format, check."""
