"""``python -m homelab`` runs the ``homelab`` command (the TUI when given no command)."""

from homelab.entry import main

raise SystemExit(main())
