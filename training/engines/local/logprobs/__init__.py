"""How the local engine's log-prob passes lay out their rows: the LM head on the trained
positions only, in chunks (``chunked``), and rows packed behind a shared prompt prefix
(``shared_prefix``)."""
