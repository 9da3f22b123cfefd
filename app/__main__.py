from gpuscope.cli.main import main

raise SystemExit(main())
