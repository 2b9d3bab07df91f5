// Types for smolvm's TypeScript SDK (index.js).

export type Seconds = number | string

export interface Exit {
  code: number
  signal?: number
  error?: string
  kind?: 'not-found' | 'cannot-run' | 'invalid' | 'io'
  timed_out?: boolean
  reason?: string
}

export type SandboxState = 'creating' | 'created' | 'running' | 'paused' | 'stopped' | 'expired'

export interface Sandbox {
  id: string
  name: string
  image: string
  image_id: string
  backend: string
  state: SandboxState
  config: Record<string, unknown>
  created_at: string
  started_at?: string
  finished_at?: string
  expires_at?: string
  exit_code?: number
  reason?: string
  snapshot?: string
  forked_from?: string
}

export interface Browser {
  id: string
  name: string
  cdp_url: string
  http_url: string
  expires_at?: string
}

/** What tells a template's start command is ready; every check given must pass. */
export interface TemplateReady {
  port?: number
  /** http://localhost:PORT/PATH, answering status (default 200) */
  url?: string
  status?: number
  file?: string
  /** found by pgrep (the image needs pgrep) */
  process?: string
  /** a command (sh -c) that exits 0 */
  cmd?: string
  /** ready no sooner than this after the start */
  after?: Seconds
  /** give up after this long (default 1m) */
  timeout?: Seconds
}

export interface TemplateOptions {
  image?: string
  /** the start command, the sandbox's main process; none: the image alone */
  start?: string[]
  ready?: TemplateReady
  env?: Record<string, string>
  workdir?: string
  user?: string
  /** every tenant may use it (admin only) */
  public?: boolean
  cpus?: number
  memory?: number | string
  /** copies to keep restored and paused, which creates claim */
  hot?: number
}

export interface Template {
  name: string
  build: string
  tenant?: string
  public?: boolean
  image: string
  image_id: string
  /** the started state's snapshot; absent for the image alone */
  snapshot?: string
  start?: string[]
  ready?: { port?: number; url?: string; status?: number; file?: string; process?: string; cmd?: string; after?: number; timeout?: number }
  env?: string[]
  built: string
  /** nanoseconds the start command took to be ready */
  ready_after?: number
  hot?: number
}

export interface Snapshot {
  id: string
  /** "sha256:…" of the content, once durable */
  digest?: string
  /** hashed and synced to disk (in the background after checkpoint) */
  durable: boolean
  name?: string
  names?: string[]
  image_id: string
  created: string
  size: number
  lineage: { sandbox: string; sandbox_name: string; parent: string }
}

export interface Volume {
  name: string
  /** the quota in bytes: writes beyond it fail with ENOSPC */
  size: number
  used: number
  created_at: string
  tenant?: string
  /** sandboxes whose config mounts it */
  used_by: string[]
}

export interface VolumeMount {
  name: string
  /** absolute path inside the sandbox */
  path: string
  readOnly?: boolean
}

export interface SandboxEvent {
  type: string
  id: string
  name: string
  state?: SandboxState
  reason?: string
  expires_at?: string
  time: string
  /** agent.* events: the run's progress (id is the run's) */
  data?: AgentProgress
}

export interface CreateOptions {
  name?: string
  image?: string
  /** Take a ready sandbox from this pool (see smolvm pool). */
  pool?: string
  cmd?: string[]
  env?: Record<string, string>
  workdir?: string
  user?: string
  hostname?: string
  cpus?: number
  memory?: number | string
  disk?: number | string
  pids?: number
  /** Time to live: default 15m; 0 is none. */
  timeout?: Seconds
  idleTimeout?: Seconds
  onExpiry?: 'stop' | 'pause'
  start?: boolean
  /** Volumes to mount (createVolume); several sandboxes may mount one. */
  volumes?: VolumeMount[]
}

export interface ExecOptions {
  env?: Record<string, string>
  workdir?: string
  user?: string
  timeout?: Seconds
  stdin?: string
  signal?: AbortSignal
}

export type ExecEvent = { type: 'stdout' | 'stderr'; data: Buffer } | { type: 'exit'; exit: Exit }

export interface ExecResult {
  exitCode: number
  stdout: Buffer
  stderr: Buffer
  exit: Exit
}

export class SmolvmError extends Error {
  code: string
  status: number
  field: string
  body: Record<string, unknown>
}
export class NotFoundError extends SmolvmError {}
export class ExpiredError extends SmolvmError {
  readonly expiredAt: Date | undefined
}
export class UnauthorizedError extends SmolvmError {}
export class TimeoutError extends SmolvmError {
  result?: ExecResult
}
export class ConflictError extends SmolvmError {}
export class InvalidRequestError extends SmolvmError {}
export class TooLargeError extends SmolvmError {}
export class BusyError extends SmolvmError {}

export interface PtyOptions {
  /** Default: bash -i -l. */
  args?: string[]
  rows?: number
  cols?: number
  env?: Record<string, string>
  workdir?: string
  user?: string
  timeout?: Seconds
  /** The terminal's output, as it comes. */
  onData?: (data: Buffer) => void
}

/** A command on a terminal inside a sandbox. */
export class Pty {
  write(data: string | Uint8Array): void
  resize(size: { rows: number; cols: number }): void
  /** Default SIGKILL (9). */
  kill(signal?: number): void
  wait(): Promise<Exit>
  /** Closing the connection kills the command. */
  close(): void
}

export class Client {
  constructor(opts?: { host?: string; token?: string })
  create(opts?: CreateOptions): Promise<Sandbox>
  list(): Promise<Sandbox[]>
  get(ref: string): Promise<Sandbox>
  start(ref: string): Promise<Sandbox>
  stop(ref: string, grace?: Seconds): Promise<Sandbox>
  kill(ref: string): Promise<void>
  setTimeout(ref: string, timeout: Seconds): Promise<Sandbox>
  execStream(ref: string, args: string[], opts?: ExecOptions): AsyncGenerator<ExecEvent, void, undefined>
  exec(
    ref: string,
    args: string[],
    opts?: ExecOptions & { onStdout?: (data: Buffer) => void; onStderr?: (data: Buffer) => void },
  ): Promise<ExecResult>
  pty(ref: string, opts?: PtyOptions): Promise<Pty>
  writeFile(ref: string, path: string, data: string | Uint8Array): Promise<void>
  readFile(ref: string, path: string): Promise<Buffer>
  checkpoint(ref: string, opts?: { name?: string; stop?: boolean }): Promise<Snapshot>
  restore(snapshot: string, opts?: { name?: string }): Promise<Sandbox>
  fork(ref: string, opts?: { n?: number; namePrefix?: string }): Promise<Sandbox[]>
  pause(ref: string): Promise<Sandbox>
  resume(ref: string): Promise<Sandbox>
  snapshots(): Promise<Snapshot[]>
  removeSnapshot(ref: string): Promise<void>
  buildTemplate(name: string, opts?: TemplateOptions): Promise<Template>
  templates(): Promise<Template[]>
  template(name: string): Promise<Template>
  removeTemplate(name: string): Promise<void>
  createVolume(name: string, opts?: { size?: number | string }): Promise<Volume>
  volumes(): Promise<Volume[]>
  volume(name: string): Promise<Volume>
  removeVolume(name: string, opts?: { force?: boolean }): Promise<void>
  browserStart(opts?: { golden?: string; allowHosts?: string[]; allowCidrs?: string[]; mode?: 'egress' | 'full'; image?: string; timeout?: Seconds }): Promise<Snapshot>
  browserNew(opts?: { golden?: string; name?: string; ttl?: Seconds }): Promise<Browser>
  browserRelease(ref: string): Promise<void>
  screenshot(url: string, opts?: { fullPage?: boolean; width?: number; height?: number; golden?: string }): Promise<Buffer>
  events(opts?: { signal?: AbortSignal }): AsyncGenerator<SandboxEvent, void, undefined>
  agentRunStart(task: string, repo: string, opts?: AgentRunOptions): Promise<AgentRun>
  agentRuns(): Promise<AgentRun[]>
  agentRun(id: string): Promise<{ run: AgentRun; iterations: AgentIteration[] }>
  agentRunStop(id: string): Promise<AgentRun>
  agentRunWatch(id: string, opts?: { signal?: AbortSignal }): AsyncGenerator<AgentProgress, void, undefined>
}

export interface AgentRunOptions {
  test?: string
  /** "builtin" (default) or an agent CLI command line */
  agent?: string
  maxIterations?: number
  maxTime?: Seconds
  maxTokens?: number
  maxCost?: number
  testTimeout?: Seconds
  /** -1: off */
  flakyReruns?: number
  stuckAfter?: number
  allowTestChanges?: boolean
}

export interface AgentUsage {
  input_tokens: number
  output_tokens: number
  cost_usd: number
}

export interface AgentTests {
  format: string
  exit: number
  passed: number
  failed: number
  skipped: number
  failing?: string[]
}

export interface AgentRun {
  id: string
  created: string
  repo: string
  task: string
  test: string
  agent: string
  state: 'running' | 'resolved' | 'stopped' | 'failed'
  reason?: string
  best: number
  base_snapshot?: string
  verdict?: AgentTests
  /** review evidence of the change, once the run ended with a verdict */
  evidence?: AgentEvidence
  flaky?: string[]
  usage: AgentUsage
  /** seconds */
  elapsed: number
}

/** What a reviewer reads of a run's change (docs/agent.md, Review evidence). */
export interface AgentEvidence {
  verdict: 'proven' | 'needs review' | 'unresolved'
  reason?: string
  /** failing on the base, passing after (SWE-bench's FAIL_TO_PASS) */
  fail_to_pass: string[]
  /** passing on the base and after */
  pass_to_pass: string[]
  /** regressions */
  pass_to_fail?: string[]
  /** tests the agent added that pass on the base code already */
  prove_nothing?: string[]
  hunks?: AgentHunk[]
  coverage: AgentCoverage
  /** seconds the evidence added */
  elapsed: number
}

/** A hunk of the final diff; pinned when the tests fail with only it reverted. */
export interface AgentHunk {
  file: string
  header: string
  /** a test file's hunk: not judged by pinning */
  test?: boolean
  pinned: boolean
  by?: string[]
  note?: string
}

/** Which changed lines the tests executed; tool is empty when not measured, "+"-joined when several tools measured. */
export interface AgentCoverage {
  tool?: string
  changed: number
  executed: number
  missed?: string[]
  not_measured?: number
  note?: string
  files?: AgentFileCoverage[]
}

/** One changed file's measured lines; missed are the lines no test ran. */
export interface AgentFileCoverage {
  file: string
  tool: 'node-v8' | 'go-cover' | 'python-trace'
  changed: number
  executed: number
  missed?: number[]
}

export interface AgentIteration {
  n: number
  parent: number
  created: string
  commit?: string
  snapshot?: string
  diff?: string
  tests?: AgentTests
  violations?: { rule: string; path: string; reason: string }[]
  flaky?: string[]
  usage: AgentUsage
  note?: string
}

/** The data of an agent.PHASE event on /v1/events. */
export interface AgentProgress {
  run: string
  iteration: number
  phase: 'started' | 'base' | 'agent' | 'rejected' | 'tests' | 'verdict' | 'done'
  passed: number
  failed: number
  flaky: number
  tokens: number
  cost_usd: number
  /** seconds */
  elapsed: number
  note?: string
}
