// Reference GPT-2 encoder for test_tokenizer: runs the npm package gpt-3-encoder (Encoder.js) on
// documents <dir>/<i>.txt for i in [begin, end) and prints each one's token ids as a JSON line.
// Usage: node tokenizer_reference.js <node_modules dir> <dir> <begin> <end>
const fs = require('fs');
const path = require('path');
const [modules, dir, begin, end] = process.argv.slice(2);
const { encode } = require(path.join(modules, 'gpt-3-encoder'));
const out = [];
for (let i = Number(begin); i < Number(end); i++) {
  const text = fs.readFileSync(path.join(dir, `${i}.txt`), 'utf-8');
  out.push(JSON.stringify(encode(text).map(x => (x === undefined ? -1 : x))));
}
process.stdout.write(out.join('\n') + '\n');
