"""The example project's chat app: the demo agent, the chat page and the demo user."""
