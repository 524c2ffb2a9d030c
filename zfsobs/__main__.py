from zfsobs.cli import main

raise SystemExit(main())
