"""``python -m refattn``: see :mod:`refattn.cli`."""
from .cli import main

raise SystemExit(main())
