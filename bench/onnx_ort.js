// W9 and the torchvision rows with onnxruntime-node (CPU, all graph optimizations): images/s over
// the median run of an exported model, fed random data of its first input's shape.
// Usage: node onnx_ort.js MODEL BATCH THREADS [NAME [C,H,W]] (NODE_PATH: onnxruntime-node)
const ort = require('onnxruntime-node');
(async () => {
  const [model, b, threads] = [process.argv[2], Number(process.argv[3]), Number(process.argv[4])];
  const name = process.argv[5] || 'resnet18_onnx';
  const chw = (process.argv[6] || '3,224,224').split(',').map(Number);
  const sess = await ort.InferenceSession.create(model, {
    intraOpNumThreads: threads, interOpNumThreads: 1, graphOptimizationLevel: 'all'});
  const dims = [b, ...chw];
  const x = new ort.Tensor('float32', Float32Array.from({length: dims.reduce((p, d) => p * d)},
                                                        () => Math.random() - 0.5),
                           dims);
  const feeds = {[sess.inputNames[0]]: x};
  for (let i = 0; i < 2; i++) await sess.run(feeds);
  const times = [];
  const start = process.hrtime.bigint();
  while (times.length < 5 ||
         (Number(process.hrtime.bigint() - start) / 1e9 < 3 && times.length < 200)) {
    const t = process.hrtime.bigint();
    await sess.run(feeds);
    times.push(Number(process.hrtime.bigint() - t) / 1e9);
  }
  times.sort((a, c) => a - c);
  const med = times[Math.floor(times.length / 2)];
  console.log(JSON.stringify({workload: 'W9', name, impl: 'onnxruntime',
                              mode: 'session', threads, params: {batch: b}, metric: 'images/s',
                              value: Number((b / med).toFixed(3)),
                              peak_rss_mib: Number((process.resourceUsage().maxRSS / 1024)
                                                       .toFixed(1))}));
})().catch(e => { console.error(e); process.exit(1); });
