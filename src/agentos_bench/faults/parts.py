"""The faults bench's parts, by name: light to import (`agentos serve` builds the bench's parser)."""

PARTS = ("storm", "provider", "overload")
