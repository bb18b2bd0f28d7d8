from deploy.cli import main

raise SystemExit(main())
