from sift_server.cli import main

raise SystemExit(main())
