import sys

from fastcomm.doctor.cli import main

sys.exit(main())
