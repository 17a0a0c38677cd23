// A plain webpack 5 production build of src/main.ts into dist/ (index.html is copied beside main.js by the test).
import { fileURLToPath } from 'node:url';

export default {
  mode: 'production',
  entry: './src/main.ts',
  output: { path: fileURLToPath(new URL('./dist', import.meta.url)), filename: 'main.js', clean: true },
  resolve: { extensions: ['.ts', '.js'] },
  module: { rules: [{ test: /\.ts$/, use: 'ts-loader' }] },
  performance: { hints: false },
};
