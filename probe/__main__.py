from probe.cli.main import main

raise SystemExit(main())
