"""``python -m harness.report``: see :mod:`harness.report` (DESIGN §8)."""

from harness.report import main

raise SystemExit(main())
