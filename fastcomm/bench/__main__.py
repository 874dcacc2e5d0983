import sys

from fastcomm.bench.cli import main

sys.exit(main())
