from riverbed.cli import main

raise SystemExit(main())
