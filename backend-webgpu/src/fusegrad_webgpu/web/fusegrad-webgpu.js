// The runtime of a model exported by fusegrad_webgpu.export_webgpu: buffers, pipelines, dispatches.

const ARRAYS = {
  float32: Float32Array, float16: Uint16Array, bfloat16: Uint16Array, int32: Int32Array,
  uint32: Uint32Array, int16: Int16Array, uint16: Uint16Array, int8: Int8Array, uint8: Uint8Array,
  bool: Uint8Array,
};

/** The tensors of a safetensors file, as byte views keyed by name. */
export function parseSafetensors(bytes) {
  const length = Number(new DataView(bytes.buffer, bytes.byteOffset).getBigUint64(0, true));
  const header = JSON.parse(new TextDecoder().decode(bytes.subarray(8, 8 + length)));
  const tensors = {};
  for (const [name, info] of Object.entries(header)) {
    if (name === "__metadata__") continue;
    const [start, end] = info.data_offsets;
    tensors[name] = bytes.subarray(8 + length + start, 8 + length + end);
  }
  return tensors;
}

/** ``data`` (a typed array) as bytes padded to whole 32-bit words, as WebGPU copies them. */
function words(data) {
  const bytes = new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  const padded = new Uint8Array(Math.max(4, Math.ceil(bytes.length / 4) * 4));
  padded.set(bytes);
  return padded;
}

/** Create the model's buffers and pipelines on ``device``; ``weights`` maps names to bytes. */
export async function createModel(device, model, weights) {
  const usage = GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST;
  const buffers = model.buffers.map((b) =>
    device.createBuffer({ size: Math.max(4, Math.ceil(b.bytes / 4) * 4), usage }));
  for (const b of model.buffers) {
    if (b.role !== "weight") continue;
    if (!(b.name in weights)) throw new Error(`weight ${b.name} is missing from the weights file`);
    device.queue.writeBuffer(buffers[b.slot], 0, words(weights[b.name]));
  }
  const pipelines = await Promise.all(model.kernels.map((k) => device.createComputePipelineAsync({
    layout: "auto",
    compute: { module: device.createShaderModule({ code: k.code }), entryPoint: k.name },
  })));
  const bindGroups = model.dispatches.map((d) => device.createBindGroup({
    layout: pipelines[d.kernel].getBindGroupLayout(0),
    entries: d.bindings.map(([binding, slot]) => ({ binding, resource: { buffer: buffers[slot] } })),
  }));

  /** Run on ``inputs`` (typed arrays, one per model input); resolves to the output arrays. */
  async function run(inputs) {
    model.inputs.forEach((slot, i) => device.queue.writeBuffer(buffers[slot], 0, words(inputs[i])));
    const encoder = device.createCommandEncoder();
    const pass = encoder.beginComputePass();
    model.dispatches.forEach((d, i) => {
      pass.setPipeline(pipelines[d.kernel]);
      pass.setBindGroup(0, bindGroups[i]);
      pass.dispatchWorkgroups(...d.workgroups);
    });
    pass.end();
    const staging = model.outputs.map((slot) => {
      const copy = device.createBuffer({
        size: buffers[slot].size, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
      encoder.copyBufferToBuffer(buffers[slot], 0, copy, 0, copy.size);
      return copy;
    });
    device.queue.submit([encoder.finish()]);
    return Promise.all(staging.map(async (copy, i) => {
      await copy.mapAsync(GPUMapMode.READ);
      const bytes = copy.getMappedRange().slice(0);
      copy.destroy();
      const plan = model.buffers[model.outputs[i]];
      return new ARRAYS[plan.dtype](bytes, 0, plan.size);
    }));
  }
  return { run };
}
