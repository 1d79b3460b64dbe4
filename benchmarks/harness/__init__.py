"""What every scenario shares: the command-line preamble (``cli``), the servers it starts
(``targets``; ``servers`` and ``balancer`` for the chaos scenario's deployments), its HTTP
client (``client``), seeding of a hub's database (``seeding``), CPU readings (``cpu``), the
report (``report``), and a throwaway PostgreSQL cluster (``postgres_cluster``, standard
library only: ``dev.d/services.py`` loads it too), also under callgrind (``callgrind``).
Nothing here imports ``tests``."""
