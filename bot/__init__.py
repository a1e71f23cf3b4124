"""Everything that touches the outside world: settings, ingress, adapters, worker, CLI."""

__all__: list[str] = []
