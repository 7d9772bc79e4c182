// Puts the Turnkeeper JavaScript client into this module's lib/, as Foundry can load it.
//
//   npm ci --prefix ../../../sdk/js     # once: installs the client's @msgpack/msgpack
//   node build.mjs [SDK_DIR]            # SDK_DIR: the client's folder, by default ../../../sdk/js
//
// lib/turnkeeper/ is a copy of SDK_DIR/src; lib/msgpack/ the ES modules of the @msgpack/msgpack
// it imports, with its licence. Foundry loads a module's scripts as they are, with no bundler and
// no import map, so the client's one bare import, "@msgpack/msgpack", becomes the relative path
// of that copy. No build tool and no other dependency.

import { cp, mkdir, readFile, readdir, rm, stat, writeFile } from "node:fs/promises";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const sdk = resolve(process.argv[2] ?? join(here, "..", "..", "..", "sdk", "js"));
const msgpack = join(sdk, "node_modules", "@msgpack", "msgpack");
const lib = join(here, "lib");
const BARE = 'from "@msgpack/msgpack"';

await rm(lib, { recursive: true, force: true });
try {
  await cp(join(msgpack, "dist.esm"), join(lib, "msgpack"), {
    recursive: true,
    filter: async (path) => path.endsWith(".mjs") || (await stat(path)).isDirectory(),
  });
} catch (error) {
  console.error(`no @msgpack/msgpack in ${msgpack} (run npm ci --prefix ${sdk}): ${error.message}`);
  process.exit(1);
}
await cp(join(msgpack, "LICENSE"), join(lib, "msgpack", "LICENSE"));

let rewritten = 0;
await mkdir(join(lib, "turnkeeper"));
for (const name of await readdir(join(sdk, "src"))) {
  if (!name.endsWith(".js")) continue;
  const source = await readFile(join(sdk, "src", name), "utf8");
  if (source.includes(BARE)) rewritten += 1;
  const local = source.replaceAll(BARE, 'from "../msgpack/index.mjs"');
  await writeFile(join(lib, "turnkeeper", name), local);
}
if (rewritten === 0) {
  console.error(`no file of ${sdk}/src imports @msgpack/msgpack: is it the Turnkeeper client?`);
  process.exit(1);
}
console.log(`lib/ holds the client of ${sdk}`);
