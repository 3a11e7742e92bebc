// onnxruntime-node (npm, installed by `make test` into build/node) runs every model
// test_onnx_export wrote and compares with Kiln's outputs (relative 1e-5).
// Usage: node check_ort.js DIR   (NODE_PATH names the node_modules holding onnxruntime-node)
const fs = require('fs');
const path = require('path');
let ort;
try {
  ort = require('onnxruntime-node');
} catch (e) {
  console.error('onnxruntime-node is not installed (make test installs it into build/node)');
  process.exit(77);
}

// .npy (format 1, little-endian <f4 / <i8 / <f8) -> {data, dims, type}
function readNpy(file) {
  const b = fs.readFileSync(file);
  const hlen = b.readUInt16LE(8);
  const h = b.toString('latin1', 10, 10 + hlen);
  const descr = /'descr': '([^']+)'/.exec(h)[1];
  const dims = /'shape': \(([^)]*)\)/.exec(h)[1].split(',').map(s => s.trim()).filter(s => s)
                   .map(Number);
  const raw = b.subarray(10 + hlen);
  const buf = raw.buffer.slice(raw.byteOffset, raw.byteOffset + raw.length);
  if (descr === '<f4') return {type: 'float32', data: new Float32Array(buf), dims};
  if (descr === '<f8') return {type: 'float64', data: new Float64Array(buf), dims};
  if (descr === '<i8') return {type: 'int64', data: new BigInt64Array(buf), dims};
  throw new Error('unsupported ' + descr);
}

(async () => {
  const root = process.argv[2];
  let bad = 0;
  for (const name of fs.readdirSync(root).sort()) {
    const dir = path.join(root, name);
    if (!fs.statSync(dir).isDirectory()) continue;
    const sess = await ort.InferenceSession.create(path.join(dir, 'model.onnx'));
    const feeds = {};
    for (const input of sess.inputNames) {
      const a = readNpy(path.join(dir, `input_${input}.npy`));
      feeds[input] = new ort.Tensor(a.type, a.data, a.dims);
    }
    const out = await sess.run(feeds);
    for (const o of sess.outputNames) {
      const want = readNpy(path.join(dir, `want_${o}.npy`));
      const got = out[o];
      let md = 0, mr = 1e-30;
      for (let i = 0; i < want.data.length; i++) {
        // Number(): int64 outputs come as BigInt
        md = Math.max(md, Math.abs(Number(got.data[i]) - Number(want.data[i])));
        mr = Math.max(mr, Math.abs(Number(want.data[i])));
      }
      const ok = got.data.length === want.data.length && md / mr <= 1e-5;
      console.log(`${name} '${o}': onnxruntime ${got.dims} vs Kiln: max rel diff ` +
                  `${(md / mr).toExponential(2)} ${ok ? 'ok' : 'MISMATCH'}`);
      if (!ok) bad++;
    }
  }
  process.exit(bad ? 1 : 0);
})().catch(e => {
  console.error(e);
  process.exit(1);
});
