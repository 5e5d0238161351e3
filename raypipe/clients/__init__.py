"""Clients of outside services that several parts of raypipe ask: `openai_chat`, the one client of
OpenAI-compatible chat-completions servers (teachers, CRAG's query rewriter)."""
