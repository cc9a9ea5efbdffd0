import sys

from graders.app.cli import main

sys.exit(main())
