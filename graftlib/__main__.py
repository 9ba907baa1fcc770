"""`python -m graftlib ...` is the `graft` command (also under torchrun: `torchrun ... -m graftlib bench ...`)."""

import sys

from graftlib.cli import main

sys.exit(main())
