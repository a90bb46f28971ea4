import sys

from director.cli.main import main

sys.exit(main())
