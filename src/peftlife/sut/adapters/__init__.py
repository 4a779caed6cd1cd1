"""Real schedulers behind the SUT protocol, each from its project's own sources."""
