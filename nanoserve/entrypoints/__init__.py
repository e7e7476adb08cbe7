"""nanoserve.entrypoints: the OpenAI-compatible server and its async front end (chapter 15)."""
