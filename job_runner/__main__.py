import sys

from job_runner.worker import main

sys.exit(main())
