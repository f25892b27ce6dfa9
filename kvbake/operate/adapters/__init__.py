"""Operating's I/O: the plan run against an endpoint, the OpenAI-compatible client, memory watch, capacity logs, doctor."""
