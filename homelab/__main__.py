"""``python -m homelab`` runs the command line."""

from homelab.cli import main

raise SystemExit(main())
