import type { Handler, JobError } from "./index.js";

/** A delivery to run a handler against natively; setters chain. */
export class TestContext {
  jobId(id: string): this;
  jobType(name: string): this;
  queue(name: string): this;
  /** The 1-based attempt; raises `maxAttempts` to it when needed. */
  attempt(n: number): this;
  maxAttempts(n: number): this;
  deferrals(n: number): this;
  priority(n: number): this;
  ageMs(ms: number): this;
  run<P>(handler: Handler<P>, payload: P): Promise<Run>;
}

export class Run {
  /** Undefined when the job completed. */
  error: JobError | undefined;
  logs: LogLine[];
  followUps: { id: string; jobType: string; payload: unknown; delayMs: number | undefined }[];
  messages(): string[];
}

export class LogLine {
  level: string;
  message: string;
  fields: [string, string][];
  field(key: string): string | undefined;
}
