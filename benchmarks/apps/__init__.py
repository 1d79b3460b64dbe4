"""What the scenarios start as processes of their own, by module path: the ceiling app,
the SDK benchmark's servers and workers, the log and chaos jobs, the documents'
bystander. Kept free of imports here: ``sdk_joblib_worker`` must not import Taskhub."""
