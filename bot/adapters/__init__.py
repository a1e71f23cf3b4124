"""Platform adapters: the only modules that import a platform SDK."""

__all__: list[str] = []
