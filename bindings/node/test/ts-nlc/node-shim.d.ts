// The few Node globals app.ts uses (no @types/node in the test's lock file).
declare const process: { argv: string[]; stdout: { write(s: string): boolean } };
