"""Reading a model's ``config.json`` the way vLLM reads it, and resolving a user's model text."""
