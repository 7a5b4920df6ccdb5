// The end of the context under `loom serve` (issue 24's scheduler repros, which the Node binding
// shares): a prompt of most of the context with --context-shift finishes every requested token
// (it used to livelock: no response, one core spinning, ~50,000 log lines a second), and the same
// conversation again with more tokens than fit ("regenerate") finishes instead of failing after
// its tokens had streamed.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { post, sse, startServer } from './harness.mjs';

const story = 'Once upon a time, there was a little girl named Lily. She loved to play outside in the park. ';

// Token ids of about n tokens of story text (the server's own tokenizer).
async function promptIds(url, n) {
  const r = await post(url, '/tokenize', { content: story.repeat(Math.ceil(n / 20) + 2) });
  assert.equal(r.status, 200, r.text);
  return r.json.tokens.slice(0, n);
}

test('a 3,005-token prompt on 4,096 cells with --context-shift generates all 2,000 tokens', async () => {
  const srv = await startServer(['-np', '1', '-c', '4096', '--context-shift']);
  try {
    const prompt = await promptIds(srv.url, 3005);
    for (let i = 0; i < 2; i++) {
      const r = await post(srv.url, '/v1/completions', { prompt, max_tokens: 2000, temperature: 0, ignore_eos: true });
      assert.equal(r.status, 200, r.text);
      assert.equal(r.json.usage.completion_tokens, 2000);
      assert.equal(r.json.choices[0].finish_reason, 'length');
    }
    // Streaming too: every token arrives and the stream ends.
    let tokens = 0;
    const s = await sse(srv.url, '/v1/completions', { prompt, max_tokens: 1500, temperature: 0, ignore_eos: true, stream: true },
      { onEvent: (e) => { if (e !== '[DONE]' && e.choices?.[0]?.text) tokens++; } });
    assert.equal(s.events.at(-1), '[DONE]');
    assert.ok(tokens > 1000, `${tokens} text chunks`);
    // No flood of log lines (the livelock logged one per spin).
    assert.ok(srv.stderr().split('\n').length < 200, `stderr has ${srv.stderr().split('\n').length} lines`);
  } finally {
    await srv.stop();
  }
});

test('the same conversation again with more tokens than fit finishes, with and without context shift', async () => {
  for (const shift of [true, false]) {
    const srv = await startServer(['-np', '2', '-c', '2048', ...(shift ? ['--context-shift'] : [])]);
    try {
      const messages = [{ role: 'user', content: story.repeat(3) }];
      const first = await post(srv.url, '/v1/chat/completions', { messages, max_tokens: 2000, temperature: 0, ignore_eos: true });
      assert.equal(first.status, 200, first.text);
      const again = await post(srv.url, '/v1/chat/completions', { messages, max_tokens: 4000, temperature: 0, ignore_eos: true });
      assert.equal(again.status, 200, `shift ${shift}: ${again.text}`);
      assert.equal(again.json.choices[0].finish_reason, 'length');
      if (shift) {
        assert.equal(again.json.usage.completion_tokens, 4000);
      } else {
        assert.equal(again.json.usage.completion_tokens, 2048 - again.json.usage.prompt_tokens);
      }
    } finally {
      await srv.stop();
    }
  }
});
