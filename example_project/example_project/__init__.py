"""The example project: a chat page streaming a Pydantic-AI agent over AG-UI."""
