// Sends longjobs jobs from Node.js: each message judged by the published schema first (ajv,
// JSON Schema 2020-12, strict, with formats), its payload measured as the dispatcher measures
// it, then sent to the queue of its priority with SendMessageBatch.
//
//   longjobs schema > schema.json
//   node producer.mjs schema.json jobs.jsonl     # one message per line
//
// Prints one line per message: "sent <job_id> <MessageId>" or "refused <job_id>: <reasons>".
// Exits 1 if any was refused or could not be sent. Queues and endpoint come from the
// environment, as `longjobs local` exports them (or as a deployed stack's outputs give them).
import { readFileSync } from "node:fs";
import { SendMessageBatchCommand, SQSClient } from "@aws-sdk/client-sqs";
import Ajv2020 from "ajv/dist/2020.js";
import addFormats from "ajv-formats";

// What the schema's descriptions state and JSON Schema cannot: the payload's size, counted
// as the UTF-8 bytes of its compact JSON (what JSON.stringify writes), and its depth.
const MAX_PAYLOAD_BYTES = 262144;
const MAX_PAYLOAD_DEPTH = 64;
// SendMessageBatch: at most 10 messages and 1 MiB in all.
const BATCH_MESSAGES = 10;
const BATCH_BYTES = 1048576;

const QUEUES = {
  high: process.env.LONGJOBS_HIGH_QUEUE_URL,
  normal: process.env.LONGJOBS_QUEUE_URL,
  low: process.env.LONGJOBS_LOW_QUEUE_URL,
};

function depth(value) {
  if (value === null || typeof value !== "object") return 0;
  const inner = Object.values(value).map(depth);
  return 1 + (inner.length ? Math.max(...inner) : 0);
}

function problems(validate, message) {
  if (!validate(message)) {
    return validate.errors.map((e) => `${e.instancePath || "/"} ${e.message}`);
  }
  const found = [];
  const bytes = Buffer.byteLength(JSON.stringify(message.payload), "utf8");
  if (bytes > MAX_PAYLOAD_BYTES) found.push(`/payload is ${bytes} bytes > ${MAX_PAYLOAD_BYTES}`);
  if (depth(message.payload) > MAX_PAYLOAD_DEPTH) found.push(`/payload nests deeper than ${MAX_PAYLOAD_DEPTH}`);
  if (!QUEUES[message.priority ?? "normal"]) found.push(`no queue URL for priority ${message.priority ?? "normal"}`);
  return found;
}

// JSON.stringify leaves U+FFFE and U+FFFF as they are, and SQS refuses a body holding them
// (SendMessage: "#x9 | #xA | #xD | #x20 to #xD7FF | #xE000 to #xFFFD | #x10000 to #x10FFFF").
function sqsBody(message) {
  return JSON.stringify(message).replace(/[\ufffe\uffff]/g, (c) => `\\u${c.charCodeAt(0).toString(16)}`);
}

async function sendAll(sqs, url, messages) {
  let failed = 0;
  for (let start = 0; start < messages.length; ) {
    // A batch: up to 10 messages and 1 MiB of bodies.
    const batch = [];
    let bytes = 0;
    while (start < messages.length && batch.length < BATCH_MESSAGES) {
      const body = sqsBody(messages[start]);
      const size = Buffer.byteLength(body, "utf8");
      if (batch.length && bytes + size > BATCH_BYTES) break;
      batch.push({ Id: String(batch.length), MessageBody: body, jobId: messages[start].job_id });
      bytes += size;
      start += 1;
    }
    let pending = batch;
    // Entries a batch did not take are sent again: the job id makes a second copy harmless.
    for (let attempt = 1; pending.length && attempt <= 3; attempt += 1) {
      const out = await sqs.send(new SendMessageBatchCommand({
        QueueUrl: url,
        Entries: pending.map(({ Id, MessageBody }) => ({ Id, MessageBody })),
      }));
      for (const ok of out.Successful ?? []) {
        const entry = pending.find((e) => e.Id === ok.Id);
        console.log(`sent ${entry.jobId} ${ok.MessageId}`);
      }
      const again = new Set((out.Failed ?? []).filter((f) => !f.SenderFault).map((f) => f.Id));
      for (const f of (out.Failed ?? []).filter((f) => f.SenderFault)) {
        const entry = pending.find((e) => e.Id === f.Id);
        console.log(`refused ${entry.jobId}: SQS: ${f.Code} ${f.Message ?? ""}`);
        failed += 1;
      }
      pending = pending.filter((e) => again.has(e.Id));
    }
    for (const entry of pending) {
      console.log(`refused ${entry.jobId}: SQS did not take it after 3 attempts`);
      failed += 1;
    }
  }
  return failed;
}

const [schemaFile, jobsFile] = process.argv.slice(2);
if (!schemaFile || !jobsFile) {
  console.error("usage: node producer.mjs schema.json jobs.jsonl (longjobs schema > schema.json)");
  process.exit(2);
}
const ajv = new Ajv2020({ strict: true, allErrors: true });
addFormats(ajv);
const validate = ajv.compile(JSON.parse(readFileSync(schemaFile, "utf8")));

const byQueue = new Map();
let refused = 0;
for (const line of readFileSync(jobsFile, "utf8").split("\n").filter((l) => l.trim())) {
  const message = JSON.parse(line);
  const found = problems(validate, message);
  if (found.length) {
    console.log(`refused ${message.job_id}: ${found.join("; ")}`);
    refused += 1;
    continue;
  }
  const url = QUEUES[message.priority ?? "normal"];
  byQueue.set(url, [...(byQueue.get(url) ?? []), message]);
}
// The client takes its endpoint from AWS_ENDPOINT_URL_SQS or AWS_ENDPOINT_URL when set (as
// local mode sets them), its region and credentials from the usual AWS settings.
const sqs = new SQSClient({});
for (const [url, messages] of byQueue) refused += await sendAll(sqs, url, messages);
process.exit(refused ? 1 : 0);
