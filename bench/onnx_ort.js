// W9 with onnxruntime-node (CPU, all graph optimizations): images/s over the median run of an
// exported model. Usage: node onnx_ort.js MODEL BATCH THREADS (NODE_PATH: onnxruntime-node)
const ort = require('onnxruntime-node');
(async () => {
  const [model, b, threads] = [process.argv[2], Number(process.argv[3]), Number(process.argv[4])];
  const sess = await ort.InferenceSession.create(model, {
    intraOpNumThreads: threads, interOpNumThreads: 1, graphOptimizationLevel: 'all'});
  const x = new ort.Tensor('float32', Float32Array.from({length: b * 3 * 224 * 224},
                                                        () => Math.random() - 0.5),
                           [b, 3, 224, 224]);
  for (let i = 0; i < 2; i++) await sess.run({x});
  const times = [];
  const start = process.hrtime.bigint();
  while (times.length < 5 ||
         (Number(process.hrtime.bigint() - start) / 1e9 < 3 && times.length < 200)) {
    const t = process.hrtime.bigint();
    await sess.run({x});
    times.push(Number(process.hrtime.bigint() - t) / 1e9);
  }
  times.sort((a, c) => a - c);
  const med = times[Math.floor(times.length / 2)];
  console.log(JSON.stringify({workload: 'W9', name: 'resnet18_onnx', impl: 'onnxruntime',
                              mode: 'session', threads, params: {batch: b}, metric: 'images/s',
                              value: Number((b / med).toFixed(3)),
                              peak_rss_mib: Number((process.resourceUsage().maxRSS / 1024)
                                                       .toFixed(1))}));
})().catch(e => { console.error(e); process.exit(1); });
