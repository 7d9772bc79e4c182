// Builds the module as Foundry loads it: puts the Turnkeeper JavaScript client into lib/, and with
// --release, the zip Foundry installs and the manifest it is installed from.
//
//   npm ci --prefix ../../../sdk/js              # once: installs the client's @msgpack/msgpack
//   node build.mjs [SDK_DIR]                     # lib/ only: link this folder into Foundry
//   node build.mjs --release OUT_DIR [SDK_DIR]   # also OUT_DIR/foundry-turnkeeper.zip and
//                                                # OUT_DIR/module.json, to publish (README.md)
//
// SDK_DIR is the client's folder, by default ../../../sdk/js. lib/turnkeeper/ is a copy of
// SDK_DIR/src; lib/msgpack/ the ES modules of the @msgpack/msgpack it imports, with its licence.
// Foundry loads a module's scripts as they are, with no bundler and no import map, so the
// client's one bare import, "@msgpack/msgpack", becomes the relative path of that copy. No build
// tool and no other dependency: the zip is written here, with Node's zlib.

import { cp, mkdir, readFile, readdir, rm, stat, writeFile } from "node:fs/promises";
import { basename, dirname, join, relative, resolve, sep } from "node:path";
import { fileURLToPath } from "node:url";
import { crc32, deflateRawSync } from "node:zlib";

const here = dirname(fileURLToPath(import.meta.url));
const args = process.argv.slice(2);
const release = args[0] === "--release" ? resolve(args[1] ?? fail("--release OUT_DIR")) : null;
const sdk = resolve((release ? args[2] : args[0]) ?? join(here, "..", "..", "..", "sdk", "js"));
const msgpack = join(sdk, "node_modules", "@msgpack", "msgpack");
const lib = join(here, "lib");
const BARE = 'from "@msgpack/msgpack"';
/** What the zip holds: what Foundry loads (module.json names the scripts and languages), the
 * client and the licences. Not the tests, nor this script. */
const SHIPPED = ["module.json", "LICENSE", "README.md", "scripts", "lang", "lib"];

function fail(message) {
  console.error(message);
  process.exit(1);
}

await rm(lib, { recursive: true, force: true });
try {
  await cp(join(msgpack, "dist.esm"), join(lib, "msgpack"), {
    recursive: true,
    filter: async (path) => path.endsWith(".mjs") || (await stat(path)).isDirectory(),
  });
} catch (error) {
  fail(`no @msgpack/msgpack in ${msgpack} (run npm ci --prefix ${sdk}): ${error.message}`);
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
  fail(`no file of ${sdk}/src imports @msgpack/msgpack: is it the Turnkeeper client?`);
}
console.log(`lib/ holds the client of ${sdk}`);

if (release) {
  const manifest = JSON.parse(await readFile(join(here, "module.json"), "utf8"));
  const zipName = `${manifest.id}.zip`;
  // Foundry downloads the zip from `download`: the name the URL ends with is the one made here.
  if (basename(new URL(manifest.download).pathname) !== zipName) {
    fail(`module.json's download must end with /${zipName}: ${manifest.download}`);
  }
  const files = [];
  for (const entry of SHIPPED) files.push(...(await walk(join(here, entry))));
  await mkdir(release, { recursive: true });
  await writeFile(join(release, zipName), await zip(files));
  await writeFile(join(release, "module.json"), JSON.stringify(manifest, null, 2) + "\n");
  console.log(`${join(release, zipName)}: ${files.length} files; ${join(release, "module.json")}`);
}

async function walk(path) {
  if (!(await stat(path)).isDirectory()) return [path];
  const found = [];
  for (const name of (await readdir(path)).sort()) found.push(...(await walk(join(path, name))));
  return found;
}

/** A zip archive of `files`, named relative to this folder, deflated. The same files make the
 * same bytes: every entry has the zip format's earliest time (1980-01-01). */
async function zip(files) {
  const local = [];
  const central = [];
  let offset = 0;
  for (const file of files) {
    const name = Buffer.from(relative(here, file).split(sep).join("/"));
    const data = await readFile(file);
    const packed = deflateRawSync(data);
    const common = Buffer.alloc(26);
    common.writeUInt16LE(20, 0); // version needed: 2.0 (deflate)
    common.writeUInt16LE(0x0800, 2); // names are UTF-8
    common.writeUInt16LE(8, 4); // deflate
    common.writeUInt16LE(0, 6); // time 00:00
    common.writeUInt16LE((0 << 9) | (1 << 5) | 1, 8); // date 1980-01-01
    common.writeUInt32LE(crc32(data), 10);
    common.writeUInt32LE(packed.length, 14);
    common.writeUInt32LE(data.length, 18);
    common.writeUInt16LE(name.length, 22);
    common.writeUInt16LE(0, 24); // no extra field
    const header = Buffer.concat([u32(0x04034b50), common, name]);
    local.push(header, packed);
    const tail = Buffer.alloc(14); // comment length, disk, attributes, then the offset
    tail.writeUInt32LE(offset, 10);
    central.push(Buffer.concat([u32(0x02014b50), u16(20), common, tail, name]));
    offset += header.length + packed.length;
  }
  const directory = Buffer.concat(central);
  const end = Buffer.alloc(22);
  end.writeUInt32LE(0x06054b50, 0);
  end.writeUInt16LE(files.length, 8);
  end.writeUInt16LE(files.length, 10);
  end.writeUInt32LE(directory.length, 12);
  end.writeUInt32LE(offset, 16);
  return Buffer.concat([...local, directory, end]);
}

function u16(value) {
  const buffer = Buffer.alloc(2);
  buffer.writeUInt16LE(value);
  return buffer;
}

function u32(value) {
  const buffer = Buffer.alloc(4);
  buffer.writeUInt32LE(value);
  return buffer;
}
