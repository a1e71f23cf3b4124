"""Feishu (Lark): checks and normalization, the Open API client, the long connection, cards."""
