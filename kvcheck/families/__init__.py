"""The engine families kvcheck judges, one package each (`kvcheck.core.family` registers them).

Nothing outside this package imports it except through the registry."""
