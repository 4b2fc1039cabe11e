"""Read API: the newest precomputed prediction per device, served from memory or Redis.

Rooms, one concern each (docs/architecture.md): `read/` (the service, the hot GET, answers,
live updates), `edge/` (what every request crosses: Host allow-list, error hygiene and bodies,
client limits, admission, request validation), `materialize/` (the predictions topic into the
stores), `board/` (the operations-center board, its page and its OpenAPI paths), `beacons/`
(UI timings and the signals taken from them), `speculation/` (precompute requests, their
budget, read hints). `app.py` and `openapi.py` join the rooms into one ASGI app and one
document; `cli.py` builds everything from one settings object (`settings.py`)."""
